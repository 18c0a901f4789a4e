"""The Kubernetes manifests: valid against Kubernetes' own schemas, and the same processes
as the Procfile, with the probes and shutdown the deployment guide describes.

Validated with ``kubernetes-validate`` (PyPI), which carries the OpenAPI schemas of each
Kubernetes release; strict, so a misspelt field fails as an unknown property.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from router.cli import processes
from router.constants import RISK_LEVELS
from router.runtime import Runtime
from router.settings import Settings

from .test_process_definitions import DOCKERFILE, procfile_commands

MANIFESTS = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes"
# The oldest release the manifests are written for (sidecar-free sleep preStop hooks are
# beta from 1.30), and the newest the validator knows.
VERSIONS = ["1.30.0", "1.37.0"]


def documents() -> list[dict[str, Any]]:
    found = []
    for path in sorted(MANIFESTS.glob("*.yaml")):
        found += [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc]
    return found


def deployments() -> dict[str, dict[str, Any]]:
    """Deployments by the process they run (``toolrouter-api`` -> ``api``)."""
    return {
        doc["metadata"]["name"].removeprefix("toolrouter-"): doc
        for doc in documents()
        if doc["kind"] == "Deployment"
    }


def container(deployment: dict[str, Any]) -> dict[str, Any]:
    (only,) = deployment["spec"]["template"]["spec"]["containers"]
    return dict(only)


@pytest.mark.parametrize("version", VERSIONS)
def test_every_manifest_is_valid_for_kubernetes(version: str) -> None:
    docs = documents()
    assert len(docs) >= 10
    for doc in docs:
        kubernetes_validate.validate(doc, version, strict=True)


def test_the_validator_rejects_a_misspelt_field() -> None:
    broken = copy.deepcopy(deployments()["api"])
    broken["spec"]["replicaz"] = broken["spec"].pop("replicas")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, VERSIONS[0], strict=True)


def test_every_procfile_process_has_a_deployment_with_its_command() -> None:
    found = deployments()
    for name, argv in procfile_commands().items():
        assert name in found, f"no Deployment runs {name}"
        assert container(found[name])["command"] == argv, name
    assert set(found) == set(procfile_commands())


def test_probes_and_shutdown_match_what_each_process_is() -> None:
    found = deployments()
    api = container(found["api"])
    assert api["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert api["livenessProbe"]["httpGet"]["path"] == "/healthz"
    settings = Settings()
    # Each worker's probe pings the node name its command line gives it.
    workers = {
        **{f"worker-{risk}": processes.worker_argv(settings, risk) for risk in RISK_LEVELS},
        "approvals": processes.approvals_argv(settings),
        "notifications": processes.notifications_argv(settings),
    }
    for name, argv in workers.items():
        given = argv[argv.index("-n") + 1].replace("%h", "$HOSTNAME")
        probe = " ".join(container(found[name])["livenessProbe"]["exec"]["command"])
        assert f"--destination {given}" in probe, (name, probe)
        grace = found[name]["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
        assert grace >= 60, name
    beat = found["beat"]["spec"]
    assert beat["replicas"] == 1 and beat["strategy"]["type"] == "Recreate"


def image_setting(name: str) -> str:
    found = re.search(rf"{name}=(\S+)", DOCKERFILE.read_text(encoding="utf-8"))
    assert found, f"the image sets {name}"
    return found.group(1)


def test_the_audit_evidence_outside_the_database_is_on_one_shared_volume(
    no_toolrouter_env: None,
) -> None:
    """The signed head (under the secrets directory) and the archive segments: written by
    the approval workers and the archive job, read by the API's verify, on any node; the
    container's own disk would lose them on the next restart."""
    state_dir = Path(image_setting("TOOLROUTER_STATE_DIR"))
    secrets_dir = image_setting("TOOLROUTER_SECRETS_DIR")
    archive = str(Runtime(Settings(state_dir=state_dir)).archive_dir)
    claims = {
        doc["metadata"]["name"]: doc
        for doc in documents()
        if doc["kind"] == "PersistentVolumeClaim"
    }
    (cronjob,) = (doc for doc in documents() if doc["kind"] == "CronJob")
    pods = {name: deployments()[name]["spec"]["template"]["spec"] for name in ("api", "approvals")}
    pods["audit-archive"] = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    (job,) = pods["audit-archive"]["containers"]
    assert job["command"] == ["toolrouter", "audit", "archive"]
    for name, pod in pods.items():
        (only,) = pod["containers"]
        volumes = {v["name"]: v for v in pod["volumes"]}
        at = {m["mountPath"]: m for m in only["volumeMounts"]}
        for path in (secrets_dir, archive):
            assert path in at, f"{name} does not mount {path}"
            claim = volumes[at[path]["name"]]["persistentVolumeClaim"]["claimName"]
            assert claims[claim]["spec"]["accessModes"] == ["ReadWriteMany"], name
        assert at[secrets_dir]["subPath"] != at[archive]["subPath"], name
