"""The base of every wire model: Docker's field names, unknown fields ignored (open schema)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class WireModel(BaseModel):
    """Request bodies ignore unknown fields; responses serialize by alias and keep nulls."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore")

    def wire(self) -> bytes:
        """The JSON body as dockerd writes it: by alias, terminated by a newline."""
        return self.model_dump_json(by_alias=True).encode() + b"\n"
