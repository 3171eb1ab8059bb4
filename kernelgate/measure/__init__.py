"""How the suite measures: device timing (``timing``), the timed callables shared by asv, pytest-benchmark
and the tuner (``workloads``), derived metrics of a case (``metrics``), JIT warm-up (``warm``), what the
numbers were measured on (``device_info``) and worker processes (``parallel``)."""
