"""Human-readable views of asv results: one run's table and chart (``bench``), the latest table per GPU
(``results_page``); and what main's history branch takes: asv's result files (``history``) and the references'
store (``reference_store``)."""
