"""The hook options (``--pre-hook``, ``--post-hook``, ``--deploy-hook``, ``--hook-timeout``).

Declared like every option in :mod:`acmecerts.cli._options`; kept apart so that module
stays one screenful of declarations per concern.
"""

from __future__ import annotations

from typing import Annotated

from ._options import Panel, opt

__all__ = ["DeployHook", "HookTimeout", "PostHook", "PreHook"]

PreHook = Annotated[
    str | None,
    opt(
        "pre-hook",
        panel=Panel.HOOKS,
        metavar="COMMAND",
        help="Run COMMAND (/bin/sh -c) once before the first order of a run; stored with "
        'the certificate for `renew` ("": remove the stored one).',
        show_default=False,
    ),
]
PostHook = Annotated[
    str | None,
    opt(
        "post-hook",
        panel=Panel.HOOKS,
        metavar="COMMAND",
        help="Run COMMAND once after all the work of a run that ordered anything, also "
        "after failures; stored like --pre-hook.",
        show_default=False,
    ),
]
DeployHook = Annotated[
    str | None,
    opt(
        "deploy-hook",
        panel=Panel.HOOKS,
        metavar="COMMAND",
        help="Run COMMAND for each certificate issued or renewed, after its files are "
        "written (RENEWED_LINEAGE, RENEWED_DOMAINS and ACMECERTS_HOOK_* in its "
        "environment); stored like --pre-hook.",
        show_default=False,
    ),
]
HookTimeout = Annotated[
    float,
    opt(
        "hook-timeout",
        panel=Panel.HOOKS,
        metavar="SECONDS",
        help="Kill a hook (and what it started) that runs longer; it counts as failed.",
    ),
]
