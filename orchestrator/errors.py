"""Errors a user can fix. The CLI turns them into one line and exit code 2, never a traceback."""

import re


class UserError(Exception):
    """Bad input: a message that names the file/field/value and says how to fix it."""

    exit_code = 2


class SubmitError(UserError):
    """Nothing could be submitted (scheduler unreachable, sbatch refused the script)."""


class FabricBelowMinimum(UserError):
    """The pre-flight measured a partition's fabric below the minimum its site declares
    (``min_busbw``): the sweep stops before its runs. Not bad input, a failed check: exit 1."""

    exit_code = 1


# Control characters (C0 incl. tab and newline, DEL, C1): a newline in a value would end a
# comment line of a rendered script and run the rest as shell; none has a use in a config value
# or an argument. Checked on every site-config string (yamlconf.read_yaml) and every argument (cli).
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
