"""What the plan-search tests (test_plan*.py) share: a model, a topology and its calibration by name."""

from mla_planner.specs.calibration import load_calibration
from mla_planner.specs.catalogue import load_model
from mla_planner.specs.topology import load_topology


def setup(model, topology):
    spec, topo = load_model(model).spec, load_topology(topology)
    return spec, topo, load_calibration(None, topo)
