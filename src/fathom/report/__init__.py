"""Reports of a run: PNG plots of training metrics and eval results, and a self-contained HTML page.

    from fathom.report.cli import build_report
    page, plots = build_report(Path("runs/quickstart"))

`fathom report RUN_DIR` is the command line. Nothing here trains or evaluates; it reads what those wrote.
"""
