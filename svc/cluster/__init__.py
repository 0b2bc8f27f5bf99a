"""Cluster store adapters: etcd (v3, through its JSON gateway) for the daemons of several hosts."""
