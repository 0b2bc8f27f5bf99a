"""The domain: containers, images, exec, volumes, networks, events. Owns state and nurseries."""
