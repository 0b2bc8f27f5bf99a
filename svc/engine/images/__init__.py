"""Images: the service (store, names, list), image configs, import, load, save and remove
(pull and push arrive here)."""
