"""/etc/microshift/update.yaml as a pydantic model: the declarative definition that
`schemas/update.schema.json` is generated from (`python -m builder schemas`).

The device reads the file with builder.updater.update_config (standard library and PyYAML, Python
3.9); tests/updater/test_update_config.py holds the two to one meaning with generated documents.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, StringConstraints, model_validator

from builder.core.models import Model, refuse
from builder.updater.update_config import (
    IMAGE_REF_RE,
    LABEL_RE,
    LIMITS,
    MAX_LABELS,
    NAME_RE,
    UPDATES_URL_RE,
    URL_RE,
    WINDOWS,
    known_zone,
)
from builder.updater.windows import WINDOW_ALLOWED, WINDOW_RE, ZONE_RE, parse_window

Label = Annotated[str, StringConstraints(pattern=LABEL_RE.pattern)]


def _limit(key: str) -> Any:
    default, low, high, allowed = LIMITS[key]
    return Field(default, ge=low, le=high, description=f"{allowed} (at most {high})")


class UpdateDocument(Model):
    """/etc/microshift/update.yaml, read by microshift-update on the device."""

    model_config = {"title": "MicroShift over-the-air updater (/etc/microshift/update.yaml)"}

    remote: str = Field("", pattern=f"{NAME_RE.pattern}|^$", description=(
        "the ostree remote whose keys verify updates; empty: the booted deployment's"))
    updates_url: str = Field("", pattern=f"{UPDATES_URL_RE.pattern}|^$", description=(
        "where updates/REF/ is published (file:///PATH: a USB stick); empty: beside the "
        "remote's repository"))
    max_bytes_per_second: int = _limit("max_bytes_per_second")
    staging_max_bytes: int = _limit("staging_max_bytes")
    retries: int = _limit("retries")
    retry_delay_seconds: int = _limit("retry_delay_seconds")
    timeout_seconds: int = _limit("timeout_seconds")
    low_speed_bytes_per_second: int = _limit("low_speed_bytes_per_second")
    run_deadline_seconds: int = _limit("run_deadline_seconds")
    reboot: bool = False
    maintenance_window: str = Field("", pattern=f"{WINDOW_RE.pattern}|^$", description=(
        f"reboots only inside it: {WINDOW_ALLOWED}; empty: any time"))
    download_window: str = Field("", pattern=f"{WINDOW_RE.pattern}|^$", description=(
        f"delta files and pulls only inside it: {WINDOW_ALLOWED}; empty: any time"))
    apply_window: str = Field("", pattern=f"{WINDOW_RE.pattern}|^$", description=(
        f"staging and reboots only inside it: {WINDOW_ALLOWED}; empty: any time"))
    time_zone: str = Field("", pattern=f"{ZONE_RE.pattern}|^$", description=(
        "the zone the windows are in (tz database name, e.g. Europe/Madrid); empty: the "
        "device's local time"))
    allow_downgrade: bool = False
    collector_url: str = Field("", pattern=f"{URL_RE.pattern}|^$", description=(
        "where the device POSTs its signed rollout verdicts; empty: they wait in "
        "/var/lib/microshift-update/outbox for `rollout collect`"))
    mode: Literal["ostree", "image"] = Field("ostree", description=(
        "image: a bootc (image-mode) device, updated by image delta; needs image_ref and "
        "updates_url"))
    image_ref: str = Field("", pattern=f"{IMAGE_REF_RE.pattern}|^$", description=(
        "image mode: the ref its signed index is published under (updates/REF/)"))
    image_registry_url: str = Field("", pattern=f"{URL_RE.pattern}|^$", description=(
        "image mode: where the image's layers are pulled when the index has no delta from "
        "the booted image (a registry or its mirror, e.g. http://10.0.2.100:5000); empty: "
        "https:// and the registry of the image's reference"))
    labels: dict[Label, Label] = Field(default_factory=dict, max_length=MAX_LABELS,
                                       description="this device's labels, matched by rollout "
                                                   "waves that select devices by label")

    @model_validator(mode="after")
    def _window(self) -> UpdateDocument:
        for key in WINDOWS:
            text = getattr(self, key)
            if text and parse_window(text).start == parse_window(text).end:
                raise refuse(f"{text!r} is empty; allowed: a window whose start and end "
                             "differ", at=key)
        if self.mode == "image" and not (self.image_ref and self.updates_url):
            raise refuse("image needs image_ref and updates_url; allowed: both set",
                         at="mode")
        if self.time_zone and not known_zone(self.time_zone):
            raise refuse(f"{self.time_zone!r} is not in the tz database", at="time_zone")
        return self
