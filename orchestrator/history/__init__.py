"""Did our cluster get slower? The results history and what reads it, in the order data flows:

``samples``     a result set as the long sample table the rest reads, and the metrics (each
                with the direction that is better for it, declared once)
``store``       the append-only history of recorded sweeps (``orch history``), no lock
``stats``       the 10 % trimmed mean, Welch's (Yuen's) and Student's t-tests, the t
                distribution, the autocorrelation's variance inflation and runs against
                others' spread
``compare``     two sample tables compared per configuration (``orch compare``)
``settings``    the settings of change point detection and their defaults
``changes``     change points of every configuration's metrics over the history (``orch
                history changes``), said as ``compare`` says a change, with what changed
``references``  a site's references.yaml and a sweep checked against it (``orch check``)
``junit``       the JUnit XML report of a check or of the change points (``--junit``)
``gathered``    a gathered sweep recorded in its site's history, a rerun against its original
"""
