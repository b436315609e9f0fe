"""Property test: random and mutated specs/topologies never crash the loaders.

Whatever is thrown at `show`, the outcome is either success (exit 0) or exactly one `error:` line on
stderr with exit status 2 - never a traceback, never another status.
"""

import string

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

SPEC = yaml.safe_load(open("mla_planner/data/models/deepseek-v3.yaml"))
TOPO = yaml.safe_load(open("topologies/2x8xh100-ib.yaml"))

values = st.one_of(st.none(), st.booleans(), st.integers(-(2**40), 2**40), st.floats(allow_nan=True),
                   st.text(max_size=12), st.lists(st.integers(-3, 300), max_size=3),
                   st.dictionaries(st.text(string.ascii_lowercase, max_size=6), st.integers(-2, 9), max_size=2))


@st.composite
def mutated(draw, base: dict):
    data = {k: (dict(v) if isinstance(v, dict) else v) for k, v in base.items()}
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["drop", "set", "add", "nested"]))
        key = draw(st.sampled_from(sorted(data))) if data else "x"
        if op == "drop":
            data.pop(key, None)
        elif op == "set":
            data[key] = draw(values)
        elif op == "add":
            data[draw(st.text(string.ascii_letters + "_", min_size=1, max_size=15))] = draw(values)
        elif isinstance(data.get(key), dict) and data[key]:
            sub = draw(st.sampled_from(sorted(data[key])))
            data[key][sub] = draw(values)
    return data


def check(result):
    assert result.exit_code in (0, 2), (result.exit_code, result.output)
    assert "Traceback" not in result.output
    if result.exit_code == 2:
        lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
        assert len(lines) == 1 and lines[0].startswith("error:"), result.stderr


def run_show(cli, tmp_path, text, *flags, name="x.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return cli("show", *flags, str(path))


SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@SETTINGS
@given(data=mutated(SPEC))
def test_mutated_model_specs(cli, tmp_path, data):
    check(run_show(cli, tmp_path, yaml.safe_dump(data)))


@SETTINGS
@given(data=mutated(TOPO))
def test_mutated_topologies(cli, tmp_path, data):
    check(run_show(cli, tmp_path, yaml.safe_dump(data), "--topology"))


@SETTINGS
@given(text=st.text(max_size=200))
def test_random_text_as_spec_topology_and_config(cli, tmp_path, text):
    check(run_show(cli, tmp_path, text))
    check(run_show(cli, tmp_path, text, "--topology"))
    check(run_show(cli, tmp_path, text, name="config.json"))
