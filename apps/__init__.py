"""Thin applications on top of the rtamt library, installed as the package ``rtamt_apps``
(the repository folder ``apps/``).  Each subcommand module exposes ``add_arguments`` and
``run``; :mod:`rtamt_apps.cli` is the ``rtamt`` command.  The library never imports this
package."""
