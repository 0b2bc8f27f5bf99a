"""Plugins: separate processes serving the engines' plugin protocol (JSON over HTTP on a unix
socket or TCP), found by name: volume, network, IPAM and authorization drivers."""
