"""What the user gives: the model, the cluster, the layout, the knobs and workload, calibration."""
