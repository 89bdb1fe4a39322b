"""Trinity-RFT's ``trinity.cli`` package: its typer command line, :mod:`trinity.cli.launcher`.

Code and scripts written for Trinity-RFT import it (``from trinity.cli import launcher``) or
run it (``python -m trinity.cli.launcher run --config X``); its commands dispatch to this
implementation's run layer. The ``trinity`` command itself is :mod:`trinity.launcher.cli`.
"""
