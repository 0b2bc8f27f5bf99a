"""The OCI runtime side: runc, cgroups, and facts about the host kernel. Knows nothing of Docker."""
