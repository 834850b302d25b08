"""JUnit XML, the test report GitLab, Jenkins and GitHub Actions display: ``orch check`` and
``orch history changes`` write one (``--junit FILE``) beside their exit status, one test case
per configuration and metric, a failure naming the value, the band it had to be in and the
change.

The elements and attributes are those the three read (GitLab's unit test reports, Jenkins'
JUnit plugin, the JUnit reporters of GitHub Actions): ``testsuites`` > ``testsuite`` >
``testcase`` (``classname``: the configuration, ``name``: the metric) holding a ``failure``
(``message``: one line; text: the detail) or a ``skipped``.
"""

from __future__ import annotations

import datetime as dt
import socket
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

from .. import files


@dataclass(frozen=True)
class Case:
    """One test case: a configuration's metric, held or not."""

    classname: str
    name: str
    failure: str | None = None  # the one-line message of a failure
    detail: str = ""  # the failure's (or the passing case's) text
    skipped: str | None = None  # why nothing was tested


def document(suite: str, cases: list[Case]) -> ET.Element:
    """The ``testsuites`` element of one suite of ``cases``."""
    failures = sum(c.failure is not None for c in cases)
    skipped = sum(c.skipped is not None and c.failure is None for c in cases)
    counts = {"tests": str(len(cases)), "failures": str(failures), "errors": "0",
              "skipped": str(skipped), "time": "0"}
    root = ET.Element("testsuites", {"name": suite, **counts})
    node = ET.SubElement(root, "testsuite", {
        "name": suite, **counts, "hostname": socket.gethostname(),
        "timestamp": dt.datetime.now(dt.timezone.utc).replace(microsecond=0).isoformat()})
    for c in cases:
        case = ET.SubElement(node, "testcase", {"classname": c.classname, "name": c.name,
                                                "time": "0"})
        if c.failure is not None:
            failure = ET.SubElement(case, "failure", {"message": c.failure,
                                                      "type": "regression"})
            failure.text = c.detail or c.failure
        elif c.skipped is not None:
            ET.SubElement(case, "skipped", {"message": c.skipped})
        elif c.detail:
            ET.SubElement(case, "system-out").text = c.detail
    return root


def write(path: Path, suite: str, cases: list[Case]) -> None:
    """Write the report (whole or not at all: a CI job reads it after the command)."""
    root = document(suite, cases)
    ET.indent(root)
    text = ET.tostring(root, encoding="unicode", xml_declaration=False)
    files.write_text_atomic(path, '<?xml version="1.0" encoding="UTF-8"?>\n' + text + "\n")
