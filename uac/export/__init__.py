"""Export a user's memory as a self-contained Python project (``uac export USER DIR``).

The project runs with plain Python 3.11+ and pytest and never imports uac::

    DIR/
      README.md            what it is, how to run it
      manifest.py          compact index: USER_ID, EXPORTED_AT, STATE_VERSION, COUNTS,
                           ENTITIES, RULES, OPEN_ALERTS
      domains/             one module per domain: dataclasses, STATE, PROVENANCE, EXTRA
      constraints/         the rules' source (vendored) over _runtime.py; RULES, evaluate()
      runner.py            prints the open alerts: <severity> <rule_id>: <message>
      tests/test_constraints.py
      pytest.ini

:func:`export_user` writes one project, :func:`export_all` one per user.
"""

from uac.export.exporter import ExportSummary, directory_names, export_all, export_user

__all__ = ["ExportSummary", "directory_names", "export_all", "export_user"]
