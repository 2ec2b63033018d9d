"""Fleets on the simulated Let's Encrypt: ``python bench/fleet.py SCENARIO... [options]``.

The same as ``python -m acmecerts.testing.fleet`` (see that module): runs the named
scenarios (``onboarding``, ``steady``, ``churn``, ``outage``, ``revocation``,
``zombies``, ``replicas`` or ``all``) with ``--certificates``, ``--days`` and ``--seed``,
prints the table of measures and writes them as JSON with ``--json PATH``::

    python bench/fleet.py all --certificates 1000 --days 30 --json fleet.json
"""

from __future__ import annotations

import sys

from acmecerts.testing.fleet.__main__ import main

if __name__ == "__main__":
    sys.exit(main())
