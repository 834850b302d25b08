"""Did our cluster get slower? The results history and what reads it, in the order data flows:

``samples``     a result set as the long sample table the rest reads, and the metrics (each
                with the direction that is better for it, declared once)
``store``       the append-only history of recorded sweeps (``orch history``)
``stats``       the 10 % trimmed mean, Welch's (Yuen's) t-test, the t distribution, the
                autocorrelation's variance inflation and one run against others' spread
``compare``     two sample tables compared per configuration (``orch compare``)
``references``  a site's references.yaml and a sweep checked against it (``orch check``)
``gathered``    a gathered sweep recorded in its site's history, a rerun against its original
"""
