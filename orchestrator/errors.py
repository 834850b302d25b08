"""Errors a user can fix. The CLI turns them into one line and exit code 2, never a traceback."""



class UserError(Exception):
    """Bad input: a message that names the file/field/value and says how to fix it."""

    exit_code = 2


class SubmitError(UserError):
    """Nothing could be submitted (scheduler unreachable, sbatch refused the script)."""
