"""Kubernetes manifests for a disaggregated deployment: a LeaderWorkerSet per pool (a group per engine instance: the
leader runs the instance's first node, the workers the others), a Service per pool over the leaders, and the router
as a Deployment with its Service.

The pods follow the SGLang project's own PD manifests for DeepSeek on LeaderWorkerSet
(sgl-project/sglang docs/references/multi_node_deployment/lws_pd/lws-examples): host networking (the engines and
their RDMA transfer bind the node's NICs), /dev/infiniband from the host with IPC_LOCK for pinned memory, /dev/shm as
a memory-backed emptyDir, the whole node's GPUs per pod. LeaderWorkerSet gives every container LWS_LEADER_ADDRESS
and LWS_WORKER_INDEX (kubernetes-sigs/lws, docs "Labels, annotations and environment variables"): the leader's
address replaces the scripts' HEAD_IP and the worker index their node rank; a leader pod is `<name>-<group>` behind
the headless Service `<name>`, so the router names each instance as `<name>-<group>.<name>`.
"""

from __future__ import annotations

import re

from mla_planner.core.errors import PlanError
from mla_planner.engines.disagg import ROUTER_PORT
from mla_planner.launch.command import NodeCommand, ShellRef
from mla_planner.launch.disagg import Node, router_argv, servers
from mla_planner.launch.shell import quote_word
from mla_planner.search.candidate import DisaggCandidate
from mla_planner.search.planfile import Plan

IMAGES = {"vllm": "vllm/vllm-openai:v0.33.0", "sglang": "lmsysorg/sglang:v0.5.23"}   # the releases' own images
# their ROCm builds, by the projects' naming: vLLM's vllm/vllm-openai-rocm:<version>; SGLang's
# lmsysorg/sglang:<version>-rocm720-mi30x (MI300X / MI325X, gfx942) or -mi35x (MI350X / MI355X, gfx950)
ROCM_IMAGES = {"vllm": {"gfx942": "vllm/vllm-openai-rocm:v0.33.0", "gfx950": "vllm/vllm-openai-rocm:v0.33.0"},
               "sglang": {"gfx942": "lmsysorg/sglang:v0.5.23-rocm720-mi30x",
                          "gfx950": "lmsysorg/sglang:v0.5.23-rocm720-mi35x"}}
GPU_RESOURCE = {"nvidia": "nvidia.com/gpu", "amd": "amd.com/gpu"}
LWS_API = "leaderworkerset.x-k8s.io/v1"
LWS_NAME = "leaderworkerset.sigs.k8s.io/name"
# a container image reference as the distribution spec writes it: [host[:port]/]path[:tag][@digest]
IMAGE_REFERENCE = re.compile(r"(?:[A-Za-z0-9.-]+(?::[0-9]{1,5})?/)?[a-z0-9]+(?:[._-]+[a-z0-9]+)*(?:/[a-z0-9]+(?:[._-]+"
                             r"[a-z0-9]+)*)*(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@[a-z0-9]+:[a-f0-9]{32,})?")
RESOURCE_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")


def engine_image(engine: str, gpu) -> str:
    """The engine release's container image for `gpu`: the CUDA image, or on AMD the ROCm build for its gfx arch."""
    return ROCM_IMAGES[engine][gpu.gfx_arch] if gpu.vendor == "amd" else IMAGES[engine]


def slug(text: str, limit: int = 40) -> str:
    """A DNS-1035 label from `text` (a model name): lower case letters, digits and dashes, a letter first."""
    word = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    word = word if word[:1].isalpha() else f"m-{word}"
    return word[:limit].rstrip("-") or "mla-plan"


def _script(c: NodeCommand, worker: bool) -> str:
    """The container's shell line: HEAD_IP from LeaderWorkerSet, then the node's command with its rank words
    computed from LWS_WORKER_INDEX on a worker (node rank i; vLLM's DP start rank i x local DP ranks)."""
    words, out = list(c.argv), []
    for i, word in enumerate(words):
        flag = words[i - 1] if i else ""
        if worker and flag == "--node-rank":
            out.append('"${LWS_WORKER_INDEX}"')
        elif worker and flag == "--data-parallel-start-rank":
            out.append(f'"$((LWS_WORKER_INDEX * {int(word)}))"')
        else:
            out.append(quote_word(word))
    head = 'HEAD_IP="${LWS_LEADER_ADDRESS}"; ' if "HEAD_IP" in c.needs else ""
    return head + "exec " + " ".join(out)


def _env(c: NodeCommand) -> list[dict]:
    out = []
    for name, value in c.env.items():
        if isinstance(value, ShellRef) and value.var == "VLLM_HOST_IP":
            out.append({"name": name, "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}})
        else:
            out.append({"name": name, "value": str(value)})
    if "VLLM_HOST_IP" in c.needs:
        out.append({"name": "VLLM_HOST_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}})
    return out


def _pod(plan: Plan, c: NodeCommand, worker: bool, image: str, component: str, model_path: str,
         rdma_resource: str | None = None) -> dict:
    vendor = plan.topology.gpu.vendor
    limits = {GPU_RESOURCE[vendor]: c.gpus, **({rdma_resource: 1} if rdma_resource else {})}
    container = {"name": "engine", "image": image, "command": ["/bin/bash", "-c", _script(c, worker)],
                 "env": _env(c),
                 "resources": {"limits": limits},
                 "securityContext": {"privileged": True, "capabilities": {"add": ["IPC_LOCK"]}},
                 "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"},
                                  *([] if rdma_resource else [{"name": "infiniband", "mountPath": "/dev/infiniband"}]),
                                  {"name": "models", "mountPath": _model_dir(model_path)}]}
    if c.port is not None:
        container["ports"] = [{"name": "http", "containerPort": c.port}]
        container["readinessProbe"] = {"httpGet": {"path": "/health", "port": c.port}, "periodSeconds": 10,
                                       "failureThreshold": 3, "initialDelaySeconds": 300}
    labels = {"app.kubernetes.io/name": "mla-plan", "app.kubernetes.io/component": component,
              **({} if worker else {"role": "leader"})}
    return {"metadata": {"labels": labels},
            "spec": {"hostNetwork": True, "hostIPC": True, "dnsPolicy": "ClusterFirstWithHostNet",
                     "containers": [container],
                     "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory"}},
                                 # the device plugin's resource gives the pod its RDMA devices; else the host's
                                 *([] if rdma_resource else [{"name": "infiniband",
                                                              "hostPath": {"path": "/dev/infiniband"}}]),
                                 {"name": "models", "hostPath": _model_volume(model_path)}]}}


def _model_volume(model_path: str) -> dict:
    """The weights' hostPath: a local checkpoint must already be there (`Directory`: a missing one stops the pod at
    once, where `DirectoryOrCreate` would start the engine on an empty folder); the hub cache is made if missing."""
    return {"path": _model_dir(model_path), "type": "Directory" if model_path.startswith("/") else "DirectoryOrCreate"}


def _model_dir(model_path: str) -> str:
    """Where the pod finds the weights: a local checkpoint's own folder from the host, or the Hugging Face cache
    the engine downloads a hub id into."""
    return model_path if model_path.startswith("/") else "/root/.cache/huggingface"


def pool_manifests(plan: Plan, base: str, role: str, nodes: list[Node], instances: int, size: int, image: str,
                   model_path: str, rdma_resource: str | None = None) -> list[dict]:
    """The pool's LeaderWorkerSet and the Service over its leaders."""
    mine = [n for n in nodes if n.role == role]
    leader = next(n.command for n in mine if n.pool_node == 0)
    name = f"{base}-{role}"
    template = {"size": size, "restartPolicy": "RecreateGroupOnPodRestart"}
    if size > 1:
        worker = next(n.command for n in mine if n.pool_node == 1)
        template["leaderTemplate"] = _pod(plan, leader, False, image, role, model_path, rdma_resource)
        template["workerTemplate"] = _pod(plan, worker, True, image, role, model_path, rdma_resource)
    else:
        template["workerTemplate"] = _pod(plan, leader, False, image, role, model_path, rdma_resource)
    lws = {"apiVersion": LWS_API, "kind": "LeaderWorkerSet",
           "metadata": {"name": name, "labels": {"app.kubernetes.io/name": "mla-plan",
                                                 "app.kubernetes.io/component": role}},
           "spec": {"replicas": instances, "leaderWorkerTemplate": template, "startupPolicy": "LeaderCreated",
                    "networkConfig": {"subdomainPolicy": "Shared"}}}
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": f"{name}-http"},
               "spec": {"selector": {LWS_NAME: name, "role": "leader"},
                        "ports": [{"name": "http", "port": leader.port, "targetPort": leader.port}]}}
    return [lws, service]


def router_manifests(engine: str, base: str, nodes: list[Node], image: str) -> list[dict]:
    """The router Deployment, every instance named by its leader pod's DNS name, and its Service."""
    names = {}
    for role in ("prefill", "decode"):
        heads = servers(nodes, role)
        for g, _ in enumerate(heads):    # every group runs the pool's first instance's command, so its port
            names[f"{role.upper()}_{g}"] = f"{base}-{role}-{g}.{base}-{role}:{heads[0].command.port}"
    argv = router_argv(engine, nodes)
    line = " ".join((w.prefix + names[w.var]) if isinstance(w, ShellRef) else quote_word(w) for w in argv)
    labels = {"app.kubernetes.io/name": "mla-plan", "app.kubernetes.io/component": "router"}
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": f"{base}-router"},
                  "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                           "template": {"metadata": {"labels": labels},
                                        "spec": {"containers": [{
                                            "name": "router", "image": image,
                                            "command": ["/bin/bash", "-c", "exec " + line],
                                            "ports": [{"name": "http", "containerPort": ROUTER_PORT}]}]}}}}
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": f"{base}-router"},
               "spec": {"selector": labels, "ports": [{"name": "http", "port": ROUTER_PORT,
                                                       "targetPort": ROUTER_PORT}]}}
    return [deployment, service]


def manifests(plan: Plan, d: DisaggCandidate, nodes: list[Node], model_path: str,
              image: str | None = None, rdma_resource: str | None = None) -> dict[str, list[dict]]:
    """{file name: objects}: the prefill pool, the decode pool, the router. `rdma_resource`: the extended resource an
    RDMA device plugin advertises (e.g. rdma/ib, rdma/hca_shared_devices_a), requested once per engine pod."""
    if not model_path:
        raise PlanError("the plan names no model path for the pods; give --model-path")
    if model_path.startswith((".", "~")):
        raise PlanError(f"model path {model_path!r} is relative to this machine; the pods need a hub id or an absolute "
                        "path on their hosts: give --model-path")
    if rdma_resource is not None and not RESOURCE_NAME.fullmatch(rdma_resource):
        raise PlanError(f"--rdma-resource {rdma_resource!r}: expected an extended resource name like rdma/ib "
                        "(a DNS subdomain, a slash, a name)")
    if image is not None and not IMAGE_REFERENCE.fullmatch(image):
        raise PlanError(f"--image {image!r}: expected a container image reference like registry:5000/name:tag or "
                        "name@sha256:... (no spaces or shell characters)")
    image = image or engine_image(d.engine, plan.topology.gpu)
    base = slug(plan.spec.name)
    return {"k8s-prefill.yaml": pool_manifests(plan, base, "prefill", nodes, d.prefill.instances,
                                               d.prefill.nodes_per_instance, image, model_path, rdma_resource),
            "k8s-decode.yaml": pool_manifests(plan, base, "decode", nodes, d.decode.instances,
                                              d.decode.nodes_per_instance, image, model_path, rdma_resource),
            "k8s-router.yaml": router_manifests(d.engine, base, nodes, image)}
