"""svc-shim: the small C program that holds a container's process while no daemon does
(``svc-shim.c`` says why and how), and the daemon's side of it: ``launch`` starts one over
``runc create`` or ``runc exec``, ``channel`` is the daemon's connection to it (the
container's descriptors, its end, the spool's acknowledgements), ``spool`` reads back what it
drained while no daemon was connected."""
