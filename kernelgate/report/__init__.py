"""Human-readable views of asv results: one run's table and chart (``bench``), the latest table per GPU
(``results_page``)."""
