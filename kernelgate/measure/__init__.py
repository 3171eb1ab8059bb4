"""How the suite measures, whatever the kernel: device timing (``timing``), how a case's calls are replayed
(``workloads``), derived metrics of a case (``metrics``), the asv classes of the kernels' suites
(``asv_classes``), JIT warm-up (``warm``), the benchmark workers (``workers``, ``worker``), their shards
(``shards``) and result files (``results``), the main job (``main_job``) and its steps (``steps``), what the
numbers were measured on (``device_info``) and worker processes (``parallel``)."""
