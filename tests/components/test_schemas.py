"""The device's configuration files (config.yaml, ovn.yaml, lvmd.yaml) have one model each
(builder/components/schemas.py). The readers on the device cannot use it (the components
loader runs with RHEL 9's Python 3.9, the plugins with the standard library only), so these
tests hold them to it: on every variant, the device-side reader and the model accept and
refuse the same documents, and the shipped JSON Schemas agree with the model."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import subprocess
import sys
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from hypothesis import assume, given
from pydantic import BaseModel, ValidationError

from builder.commands.schemas import SCHEMAS_DIR, generated
from builder.components.config import parse_config
from builder.components.schemas import LvmdDocument, MicroShiftConfigDocument, OvnDocument
from builder.core.errors import InputError
from tests.support.cli import PROJECT_ROOT
from tests.support.mutations import check_schema_agrees, mutated, schema_validator

SOURCES = PROJECT_ROOT / "specs/sources"
CONFIG = {
    "dns": {"baseDomain": "edge.example.com"},
    "network": {"clusterNetwork": ["10.42.0.0/16"], "serviceNetwork": ["10.43.0.0/16"],
                "serviceNodePortRange": "30000-32767"},
    "node": {"hostnameOverride": "edge-1", "nodeIP": "192.0.2.10"},
    "apiServer": {"advertiseAddress": "192.0.2.10", "subjectAltNames": ["edge-1.local"]},
    "debugging": {"logLevel": "Normal"},
    "etcd": {"memoryLimitMB": 0},
    "manifests": {"kustomizePaths": ["/etc/microshift/manifests.d/*"]},
}
OVN = {"disableOVSInit": False, "mtu": 1400}
LVMD = {"socket-name": "/run/lvmd/lvmd.socket", "device-classes": [
    {"name": "default", "volume-group": "rhel", "default": True, "spare-gb": 0,
     "stripe": 2, "stripe-size": "64k"},
    {"name": "ssd", "volume-group": "vg_ssd"}]}


def _plugin(directory: str) -> ModuleType:
    path = next(SOURCES.glob(f"*/usr/lib/microshift/components.d/{directory}/plugin"))
    loader = importlib.machinery.SourceFileLoader(f"plugin_{directory[:3]}", str(path))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


OVNK = _plugin("005-networking-ovnk")
TOPOLVM = _plugin("010-storage-topolvm")


def _model_accepts(model: type[BaseModel], doc: Any) -> bool:
    try:
        model.model_validate(doc)
    except ValidationError:
        return False
    return True


def _agrees_with_schema(name: str, model: type[BaseModel], doc: Any) -> None:
    check_schema_agrees(model, schema_validator(name), doc)


@pytest.mark.fuzz
@given(doc=mutated(CONFIG))
def test_config_yaml_reader_and_model_agree(doc: Any) -> None:
    try:
        parse_config({} if doc is None else doc, "config.yaml")  # as load_config does
        reader = True
    except InputError as exc:
        assert "\n" not in str(exc) and exc.field, str(exc)
        reader = False
    assert reader == _model_accepts(MicroShiftConfigDocument, {} if doc is None else doc), doc
    _agrees_with_schema("config", MicroShiftConfigDocument, {} if doc is None else doc)


def _plugin_reads(write: Any, text: str) -> bool | None:
    """True/False: the plugin accepts/refuses the file; None: outside its YAML subset."""
    try:
        OVNK.read_yaml_subset(text, "file")
    except OVNK.ConfigError:
        return None
    try:
        write(text)
    except (OVNK.ConfigError, TOPOLVM.ConfigError) as exc:
        assert "\n" not in str(exc), str(exc)
        return False
    return True


@pytest.mark.fuzz
@given(doc=mutated(OVN))
def test_ovn_yaml_plugin_and_model_agree(doc: Any) -> None:
    assume(isinstance(doc, dict) and doc)
    root = Path(tempfile.mkdtemp(prefix="ovn-"))
    (root / "etc/microshift").mkdir(parents=True)

    def read(text: str) -> None:
        (root / "etc/microshift/ovn.yaml").write_text(text)
        OVNK.ovn_config(str(root))

    accepted = _plugin_reads(read, yaml.safe_dump(doc, allow_unicode=True))
    assume(accepted is not None)
    parsed = OVNK.read_yaml_subset(yaml.safe_dump(doc, allow_unicode=True), "file")
    assert accepted == _model_accepts(OvnDocument, parsed), parsed
    _agrees_with_schema("ovn", OvnDocument, parsed)


@pytest.mark.fuzz
@given(doc=mutated(LVMD))
def test_lvmd_yaml_plugin_and_model_agree(doc: Any) -> None:
    assume(isinstance(doc, dict) and doc)
    path = Path(tempfile.mkdtemp(prefix="lvmd-")) / "lvmd.yaml"

    def read(text: str) -> None:
        path.write_text(text)
        TOPOLVM.lvmd_config(path)

    text = yaml.safe_dump(doc, allow_unicode=True)
    accepted = _plugin_reads(read, text)
    assume(accepted is not None)
    parsed = TOPOLVM.read_yaml_subset(text, "file")
    assert accepted == _model_accepts(LvmdDocument, parsed), parsed
    _agrees_with_schema("lvmd", LvmdDocument, parsed)


def test_shipped_schemas_are_the_ones_the_models_generate() -> None:
    for name, text in generated().items():
        assert (SCHEMAS_DIR / name).read_text() == text, \
            f"{name} is stale: run `python -m builder schemas`"


@pytest.mark.parametrize(("schema", "sample"), [
    ("release", "release.yaml"),
    ("profiles", "blueprints/profiles.yaml"),
    ("config", "specs/sources/microshift-core/etc/microshift/config.yaml"),
    ("ovn", "specs/sources/microshift-networking-ovnk/etc/microshift/ovn.yaml"),
    ("lvmd", "specs/sources/microshift-storage-topolvm/etc/microshift/lvmd.yaml"),
])
def test_sample_files_name_their_schema_and_check_jsonschema_accepts_them(
        schema: str, sample: str) -> None:
    path = PROJECT_ROOT / sample
    first = path.read_text().splitlines()[0]
    assert first.startswith("# yaml-language-server: $schema=")
    assert (path.parent / first.split("=", 1)[1]).resolve() == SCHEMAS_DIR / f"{schema}.schema.json"
    proc = subprocess.run([sys.executable, "-m", "check_jsonschema", "--schemafile",
                           str(SCHEMAS_DIR / f"{schema}.schema.json"), str(path)],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize(("schema", "text", "field"), [
    ("ovn", "mtu: 99999\n", "mtu"),
    ("ovn", "mtu: 1400\nbogus: 1\n", "bogus"),
    ("lvmd", "device-classes: []\n", "device-classes"),
    ("lvmd", "device-classes:\n  - {name: Bad_Name, volume-group: rhel}\n", "name"),
    ("config", "network: {clusterNetwork: [10.42.0.0/16, 10.44.0.0/16]}\n", "clusterNetwork"),
    ("config", "debugging: {logLevel: Loud}\n", "logLevel"),
    ("release", "version: 4.14.2-1\n", "version"),
    ("profiles", "images: {x: {description: x, components: [core], colour: blue}}\n", "colour"),
])
def test_check_jsonschema_rejects_what_the_tool_rejects(tmp_path: Path, schema: str, text: str,
                                                        field: str) -> None:
    """The same bad inputs the tool refuses (see the readers' tests), through the standard
    validator editors and CI use."""
    path = tmp_path / "input.yaml"
    path.write_text(text)
    proc = subprocess.run([sys.executable, "-m", "check_jsonschema", "--schemafile",
                           str(SCHEMAS_DIR / f"{schema}.schema.json"), str(path)],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 1 and field in proc.stdout, proc.stdout + proc.stderr
