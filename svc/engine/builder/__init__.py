"""The builder (``POST /build``): context, steps, cache; the pure parts are ``svc.svcfile``."""
