"""The demo's report: markdown and PNG plots of one `lego demo` run (see docs/demo.md)."""

from .report import DemoReportError, write_report

__all__ = ["DemoReportError", "write_report"]
