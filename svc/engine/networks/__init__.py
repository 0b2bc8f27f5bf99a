"""Networks: the service (built-in and user bridge networks, wiring containers in), IPAM,
published ports and the embedded DNS server."""
