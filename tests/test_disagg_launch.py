"""Launching a disaggregated deployment (issue 21's second acceptance item): `emit --disaggregated N` writes the
pools' node scripts, the router and the Kubernetes manifests; the engine commands pass the engines' own flag
definitions, the manifests the Kubernetes and LeaderWorkerSet schemas (tests/fixtures/k8s, offline)."""

import json
from copy import deepcopy
from pathlib import Path

import pytest
import yaml
from jsonschema import Draft202012Validator
from referencing import Registry, Resource

from mla_planner.engines.parser.check import check_command
from mla_planner.launch.disagg import deployment_nodes
from mla_planner.search.planfile_read import read_plan

SCHEMAS = Path(__file__).parent / "fixtures" / "k8s"
KINDS = {("apps/v1", "Deployment"): "deployment-apps-v1.json", ("v1", "Service"): "service-v1.json",
         ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet"): "leaderworkerset-v1.json"}
ARGS = ("-m", "deepseek-v3", "-t", "4x8xh200-ib", "--input-len", "4096", "--output-len", "1024", "--tpot-ms", "30")


def schema_errors(obj: dict) -> list[str]:
    registry = Resource.from_contents(json.loads((SCHEMAS / "definitions.json").read_text())) @ Registry()
    schema = json.loads((SCHEMAS / KINDS[obj["apiVersion"], obj["kind"]]).read_text())
    return [f"{list(e.absolute_path)}: {e.message}"
            for e in Draft202012Validator(schema, registry=registry).iter_errors(obj)]


@pytest.fixture(scope="module", params=["sglang", "vllm"])
def emitted(request, tmp_path_factory):
    from click.testing import CliRunner

    from mla_planner.cli.app import app
    engine = request.param
    root = tmp_path_factory.mktemp(engine)
    r = CliRunner().invoke(app, ["plan", *ARGS, "-e", engine, "--json"])
    assert r.exit_code == 0, r.output
    (root / "plan.json").write_text(r.stdout)
    out = root / "launch"
    r = CliRunner().invoke(app, ["emit", "--plan", str(root / "plan.json"), "--disaggregated", "1", "-o", str(out)])
    assert r.exit_code == 0, r.output
    return engine, read_plan(root / "plan.json"), out


def test_the_folder_has_every_pool_node_the_router_and_the_manifests(emitted):
    engine, plan, out = emitted
    d = plan.disaggregated[0]
    names = {p.name for p in out.iterdir()}
    for pool in (d.prefill, d.decode):
        for k in range(pool.instances * pool.nodes_per_instance):
            assert f"{pool.role}-node-{k}.sh" in names
    assert {"router.sh", "bench.sh", "README.md", "plan.json", "k8s-prefill.yaml", "k8s-decode.yaml",
            "k8s-router.yaml"} <= names
    router = (out / "router.sh").read_text().replace(" \\\n    ", " ")
    assert ("sglang_router.launch_router --pd-disaggregation" if engine == "sglang" else
            "vllm-router --vllm-pd-disaggregation") in router
    assert router.count("--prefill") == d.prefill.instances and router.count("--decode") == d.decode.instances
    assert 'BENCH_PORT="${BENCH_PORT:-8090}"' in (out / "bench.sh").read_text()     # against the router


def test_every_engine_command_passes_the_engines_flag_definitions_with_its_role(emitted):
    engine, plan, _ = emitted
    d = plan.disaggregated[0]
    nodes = deployment_nodes(plan, d)
    assert len(nodes) == d.prefill.gpus // 8 + d.decode.gpus // 8
    for n in nodes:
        c = n.command
        assert check_command(c.engine_args, engine, f"sm{plan.topology.gpu.sm}",
                             model_max_len=plan.spec.max_position_embeddings) == [], c.argv
        words = " ".join(c.argv)
        if engine == "sglang":
            assert f"--disaggregation-mode {n.role}" in words
            assert ("--disaggregation-bootstrap-port" in words) == (n.role == "prefill")
        else:
            role = "kv_producer" if n.role == "prefill" else "kv_consumer"
            assert json.loads(c.argv[c.argv.index("--kv-transfer-config") + 1])["kv_role"] == role
            assert c.env["VLLM_NIXL_SIDE_CHANNEL_HOST"] == "${VLLM_HOST_IP}" and "VLLM_HOST_IP" in c.needs


def test_the_manifests_pass_the_kubernetes_and_leaderworkerset_schemas(emitted):
    engine, plan, out = emitted
    d = plan.disaggregated[0]
    kinds = []
    for name in ("k8s-prefill.yaml", "k8s-decode.yaml", "k8s-router.yaml"):
        for obj in yaml.safe_load_all((out / name).read_text()):
            assert schema_errors(obj) == [], (name, obj["kind"])
            kinds.append(obj["kind"])
    assert kinds == ["LeaderWorkerSet", "Service", "LeaderWorkerSet", "Service", "Deployment", "Service"]
    decode = next(yaml.safe_load_all((out / "k8s-decode.yaml").read_text()))
    assert decode["spec"]["replicas"] == d.decode.instances
    template = decode["spec"]["leaderWorkerTemplate"]
    assert template["size"] == d.decode.nodes_per_instance
    if template["size"] > 1:
        worker = template["workerTemplate"]["spec"]["containers"][0]["command"][2]
        assert 'HEAD_IP="${LWS_LEADER_ADDRESS}"' in worker and "LWS_WORKER_INDEX" in worker


def test_the_schemas_refuse_a_broken_manifest(emitted):
    """The check can fail: a wrong type, an unknown field and a missing worker template are each refused."""
    _, _, out = emitted
    lws = next(yaml.safe_load_all((out / "k8s-prefill.yaml").read_text()))
    wrong = deepcopy(lws)
    wrong["spec"]["replicas"] = "two"
    unknown = deepcopy(lws)
    unknown["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]["gpus"] = 8
    missing = deepcopy(lws)
    del missing["spec"]["leaderWorkerTemplate"]["workerTemplate"]
    for bad in (wrong, unknown, missing):
        assert schema_errors(bad)


def test_emit_refuses_aggregated_options_with_a_disaggregated_deployment(cli, emitted, tmp_path):
    _, _, out = emitted
    r = cli("emit", "--plan", str(out / "plan.json"), "--disaggregated", "1", "--candidate", "1", "-o",
            str(tmp_path / "x"))
    assert r.exit_code == 2 and r.stderr.startswith("error: --candidate")
    r = cli("emit", "--plan", str(out / "plan.json"), "--disaggregated", "7", "-o", str(tmp_path / "y"))
    assert r.exit_code == 2 and "out of range" in r.stderr


def test_plan_emit_writes_the_winning_disaggregated_deployment(cli, tmp_path):
    r = cli("plan", *ARGS, "-e", "sglang", "--emit", str(tmp_path / "out"))
    assert r.exit_code == 0, r.output
    assert (tmp_path / "out" / "router.sh").exists() and (tmp_path / "out" / "k8s-decode.yaml").exists()


def test_every_group_of_a_pool_is_routed_to_the_port_its_pods_listen_on(cli, tmp_path):
    """A pool of several instances: every LeaderWorkerSet group runs the pool's first instance's command, so the
    router names each group's leader at that one port (the bare-metal scripts shift ports per instance)."""
    r = cli("plan", "-m", "deepseek-v3", "-t", "gb200-nvl72", "--input-len", "4096", "--output-len", "1024",
            "--tpot-ms", "30", "-e", "sglang", "--json")
    assert r.exit_code == 0, r.output
    (tmp_path / "plan.json").write_text(r.stdout)
    plan = read_plan(tmp_path / "plan.json")
    d = plan.disaggregated[0]
    assert max(d.prefill.instances, d.decode.instances) > 1
    out = tmp_path / "out"
    assert cli("emit", "--plan", str(tmp_path / "plan.json"), "-d", "1", "-o", str(out)).exit_code == 0
    docs = {name: list(yaml.safe_load_all((out / name).read_text()))
            for name in ("k8s-prefill.yaml", "k8s-decode.yaml", "k8s-router.yaml")}
    for objs in docs.values():
        assert all(schema_errors(o) == [] for o in objs)
    router = docs["k8s-router.yaml"][0]["spec"]["template"]["spec"]["containers"][0]["command"][2]
    for role, pool in (("prefill", d.prefill), ("decode", d.decode)):
        lws = docs[f"k8s-{role}.yaml"][0]
        pod = lws["spec"]["leaderWorkerTemplate"].get("leaderTemplate") or \
            lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]
        port = pod["spec"]["containers"][0]["ports"][0]["containerPort"]
        for g in range(pool.instances):
            assert f"http://deepseek-v3-{role}-{g}.deepseek-v3-{role}:{port}" in router


def test_mtp_plans_emit_and_the_planners_lint_accepts_the_pool_commands(cli, tmp_path):
    """SGLang with MTP: the prefill pool's sequence cap stays within DeepEP's dispatch limit (a cap of 1,024 per rank
    once made the emitted command fail its own checks); `lint` reads SGLang's totals per DP rank as the plan does."""
    r = cli("plan", *ARGS, "-e", "sglang", "--mtp", "--json")
    assert r.exit_code == 0, r.output
    (tmp_path / "plan.json").write_text(r.stdout)
    out = tmp_path / "out"
    r = cli("emit", "--plan", str(tmp_path / "plan.json"), "-d", "1", "-o", str(out))
    assert r.exit_code == 0, r.output
    plan = read_plan(tmp_path / "plan.json")
    for n in deployment_nodes(plan, plan.disaggregated[0]):
        words = [w.replace("${HEAD_IP}", "10.0.0.1") for w in n.command.argv]
        r = cli("lint", "-m", "deepseek-v3", "-t", "4x8xh200-ib", "--", *words)
        assert r.exit_code == 0, (n.role, r.output)


def test_an_rdma_device_plugins_resource_is_requested_once_per_engine_pod(cli, emitted, tmp_path):
    _, _, out = emitted
    target = tmp_path / "rdma"
    r = cli("emit", "--plan", str(out / "plan.json"), "-d", "1", "-o", str(target), "--rdma-resource", "rdma/ib")
    assert r.exit_code == 0, r.output
    lws = next(yaml.safe_load_all((target / "k8s-decode.yaml").read_text()))
    assert schema_errors(lws) == []
    pod = lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]
    assert pod["containers"][0]["resources"]["limits"]["rdma/ib"] == 1
    # the plugin's resource replaces the host's /dev/infiniband, and the README says so (QA)
    assert "infiniband" not in {v["name"] for v in pod["volumes"]}
    assert "infiniband" not in {m["name"] for m in pod["containers"][0]["volumeMounts"]}
    assert "`rdma/ib: 1` per pod, in place of `/dev/infiniband` from the host" in (target / "README.md").read_text()
    r = cli("emit", "--plan", str(out / "plan.json"), "-d", "1", "-o", str(tmp_path / "bad"), "--rdma-resource",
            "rdma ib; rm -rf /")
    assert r.exit_code == 2 and "expected an extended resource name" in r.stderr
    r = cli("emit", "--plan", str(out / "plan.json"), "-d", "1", "-o", str(tmp_path / "img"), "--image",
            "my.reg:5000/sglang:v1 $(whoami)")
    assert r.exit_code == 2 and "expected a container image reference" in r.stderr and not (tmp_path / "img").exists()


def test_the_readme_has_the_sections_the_node_scripts_point_to(emitted):
    """Every pool script that passes the EP all-to-all flag points to README.md's 'Expert-parallel all-to-all'
    section, and an FP8 KV cache gets the aggregated README's evaluation advice (QA: both were missing)."""
    engine, plan, out = emitted
    readme = (out / "README.md").read_text()
    pointing = [p.name for p in sorted(out.glob("*-node-*.sh")) if "'Expert-parallel all-to-all'" in p.read_text()]
    assert not pointing or "## Expert-parallel all-to-all (" in readme, pointing
    if plan.disaggregated[0].decode.knobs.kv_cache_dtype != "bf16":
        assert "score a small evaluation (a few hundred GSM8K questions)" in readme
    bench = (out / "bench.sh").read_text()
    assert "it refuses results measured behind this router" in bench and "run it at two or more" not in bench
    assert "mla_plan_deployment=D1" in bench     # what calibrate refuses them by


def test_a_local_checkpoint_must_be_on_the_host(cli, emitted, tmp_path):
    _, _, out = emitted
    target = tmp_path / "local"
    assert cli("emit", "--plan", str(out / "plan.json"), "-d", "1", "-o", str(target), "--model-path",
               "/models/DeepSeek-V3").exit_code == 0
    pod = next(yaml.safe_load_all((target / "k8s-decode.yaml").read_text()))["spec"]["leaderWorkerTemplate"][
        "workerTemplate"]["spec"]
    assert {v["name"]: v for v in pod["volumes"]}["models"]["hostPath"] == {"path": "/models/DeepSeek-V3",
                                                                            "type": "Directory"}


@pytest.mark.parametrize("edit, words", [
    (lambda d: d["pools"][0].update(nodes_per_instance=2), "not the 2 x 8 of its nodes"),
    (lambda d: d["pools"][1]["layout"].update(pp=2), "pipeline stages are not planned"),
    (lambda d: d["pools"][1].update(instances=9), "more than the topology's 4 nodes"),
    (lambda d: d["pools"][1]["knobs"].update(redundant_experts=3), "do not spread evenly"),
    (lambda d: d["pools"][1]["knobs"].update(kv_cache_dtype="fp8" if d["pools"][0]["knobs"]["kv_cache_dtype"] ==
                                             "bf16" else "bf16"), "the same KV cache dtype on both pools"),
])
def test_a_hand_edited_pool_is_refused_in_one_line(cli, emitted, tmp_path, edit, words):
    _, _, out = emitted
    data = json.loads((out / "plan.json").read_text())
    edit(data["disaggregated"][0])
    bad = tmp_path / "plan.json"
    bad.write_text(json.dumps(data))
    r = cli("emit", "--plan", str(bad), "-d", "1", "-o", str(tmp_path / "x"))
    assert r.exit_code == 2 and r.stderr.count("\n") == 1 and words in r.stderr, r.output


def test_a_deployment_with_some_figures_missing_still_emits(cli, emitted, tmp_path):
    _, _, out = emitted
    data = json.loads((out / "plan.json").read_text())
    for name in ("queue_s", "throughput_tokens_per_s_per_gpu_low"):
        data["disaggregated"][0]["performance"].pop(name)
    (tmp_path / "plan.json").write_text(json.dumps(data))
    r = cli("emit", "--plan", str(tmp_path / "plan.json"), "-d", "1", "-o", str(tmp_path / "x"))
    assert r.exit_code == 0, r.output
    assert "only some) figures" in (tmp_path / "x" / "README.md").read_text()


def test_the_transfer_devices_come_from_the_topologys_hcas_without_ncclss_decorations():
    from mla_planner.launch.disagg import transfer_devices
    assert transfer_devices("mlx5_0,mlx5_1") == ["mlx5_0", "mlx5_1"]
    assert transfer_devices("=mlx5_0:1,=mlx5_3:1") == ["mlx5_0", "mlx5_3"]
    assert transfer_devices("^mlx5_8") == [] and transfer_devices(None) == []


def test_the_pods_refuse_a_model_path_relative_to_this_machine(cli, emitted, tmp_path):
    _, _, out = emitted
    r = cli("emit", "--plan", str(out / "plan.json"), "-d", "1", "-o", str(tmp_path / "x"), "--model-path",
            "./DeepSeek-V3")
    assert r.exit_code == 2 and "relative to this machine" in r.stderr
