"""FROM's image: the one in the store, or pulled from its registry when it is missing or
the build asks for ``pull=1``, with the credentials ``X-Registry-Config`` carries for that
registry. The pull's progress lines go into the build's stream, as engines sent them.

Cancellation: the pull stops at once; what it committed is complete or absent (``Puller``).
"""

from __future__ import annotations

import trio

from svc.engine.builder.job import Job
from svc.engine.builder.output import Message, StepFailed
from svc.engine.images.service import Image
from svc.errors import NotFound, SvcError, unwrap
from svc.wire import reference
from svc.wire.authconfig import lookup


async def base_image(job: Job, name: str) -> Image:
    """The image FROM names; pulled if missing or if the build says ``pull=1``."""
    if not job.spec.pull:
        try:
            return job.images.resolve(name)
        except NotFound:
            pass
    try:
        ref = reference.parse(name).with_default_tag()
    except SvcError as exc:
        raise StepFailed(f"FROM {name}: {exc}") from None
    try:
        await _pull(job, ref)
    except Exception as exc:  # noqa: BLE001 - any failure of the pull ends the step
        cause = unwrap(exc)
        if not isinstance(cause, SvcError):
            raise
        raise StepFailed(f"FROM {name}: pulling the image failed: {cause}") from None
    try:
        return job.images.resolve(ref.familiar_string())
    except NotFound:
        raise StepFailed(f"FROM {name}: the pull did not give the image") from None


async def _pull(job: Job, ref: reference.Reference) -> None:
    credentials = lookup(job.spec.registry_auth, ref.domain)
    pull = await job.puller.prepare(ref.familiar_string(), None, credentials)
    send, recv = trio.open_memory_channel[Message](64)

    async def relay() -> None:
        async for msg in recv:
            await job.out.message(msg)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(relay)
        async with send:
            await job.puller.run(pull, send)
