"""What the api consumes of the engine, one small protocol per router (moby's ``backend.go``
is the model): ``create_app`` hands the engine to each router's ``register`` typed as the
protocol that router needs, so a router sees only its slice and a test can hand it a fake."""

from __future__ import annotations

from typing import Protocol

from svc.engine.builder.builder import Builder
from svc.engine.containers.service import ContainerService
from svc.engine.events import EventBus
from svc.engine.images.pull import Puller
from svc.engine.images.push import Pusher
from svc.engine.images.service import ImageService
from svc.engine.networks.service import NetworkService
from svc.engine.registries import Registries
from svc.engine.volumes.service import VolumeService
from svc.models.system import SystemInfo, VersionInfo


class SystemBackend(Protocol):
    """``/_ping``, ``/version``, ``/info``."""

    def version(self) -> VersionInfo: ...

    def info(self) -> SystemInfo: ...


class EventsBackend(Protocol):
    """``/events``."""

    @property
    def events(self) -> EventBus: ...


class ImagesBackend(Protocol):
    """The image endpoints (a pull is an image create)."""

    @property
    def images(self) -> ImageService: ...

    @property
    def puller(self) -> Puller: ...


class RegistryBackend(Protocol):
    """``/auth``, ``/images/search`` and ``/images/{name}/push``."""

    @property
    def registries(self) -> Registries: ...

    @property
    def pusher(self) -> Pusher: ...


class BuildBackend(Protocol):
    """``/build``."""

    @property
    def builder(self) -> Builder: ...


class ContainersBackend(Protocol):
    """The container endpoints (and exec): containers, and the images and networks their
    shapes show."""

    @property
    def containers(self) -> ContainerService: ...

    @property
    def images(self) -> ImageService: ...

    @property
    def networks(self) -> NetworkService: ...

    @property
    def events(self) -> EventBus: ...


class NetworksBackend(Protocol):
    """The network endpoints (connect and disconnect act on containers)."""

    @property
    def networks(self) -> NetworkService: ...

    @property
    def containers(self) -> ContainerService: ...


class VolumesBackend(Protocol):
    """The volume endpoints."""

    @property
    def volumes(self) -> VolumeService: ...
