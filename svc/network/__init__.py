"""Network adapters: bridges, veth pairs and addresses through netlink, iptables rules."""
