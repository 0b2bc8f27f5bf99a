"""On-disk adapters: the object store, the event log, later layers and volumes. No HTTP here."""
