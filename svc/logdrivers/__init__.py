"""Log drivers: a container's output to the journal, syslog, GELF and fluentd receivers."""
