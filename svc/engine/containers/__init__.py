"""Containers: the service and its record, the state machine, create (config, spec, mounts),
running and supervising, exec, attach, logs, stats, files, and a container's networking and
volumes."""
