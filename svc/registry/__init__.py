"""The registry adapter: a Registry HTTP API v2 client (trio, cancellable) and its auth.

``client`` (RegistryClient, login), ``transport`` (endpoints, TLS, RegistryConfig), ``auth``
(challenges, tokens), ``manifests`` and ``schema1`` (formats), ``blobs`` (downloads),
``uploads`` (pushes, mounts), ``search``, ``digests``, ``errors``. The image reference
grammar it uses lives in ``svc.wire.reference``, credentials in ``svc.wire.authconfig``.
"""
