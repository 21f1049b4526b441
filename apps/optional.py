"""Optional parts of an installation that some commands need, and the one-line error that
says what to install when one is missing (``rtamt CMD: MESSAGE``, exit status
:data:`EXIT_MISSING`; see :mod:`rtamt_apps.cli`)."""
from __future__ import annotations

#: exit status of a command whose installation lacks a part it needs (not a usage error:
#: nothing is wrong with the command line)
EXIT_MISSING = 1


class MissingComponent(Exception):
    """A part of the installation a command needs is missing; the message says what to
    install.  Not a ``RuntimeError``/``OSError``: the apps' handlers of input and device
    errors (exit 2) let it through to :func:`rtamt_apps.cli.main`."""


def require_qt() -> None:
    """Import Qt (PySide6) and pyqtgraph, the ``rtamt[monitor]`` extra; raise
    :class:`MissingComponent` saying what to install if either cannot be imported."""
    try:
        import pyqtgraph  # noqa: F401
        import PySide6  # noqa: F401
    except ModuleNotFoundError as e:
        raise MissingComponent(
            f"the monitor needs Qt and pyqtgraph ({e.name} is not installed): "
            "pip install 'rtamt[monitor]'") from e
    except ImportError as e:           # installed, but a system library is missing
        raise MissingComponent(f"Qt could not be loaded: {' '.join(str(e).split())}") from e


def require_portaudio():
    """Import sounddevice (the PortAudio library); raise :class:`MissingComponent`
    saying what to install if it cannot be loaded.  Returns the module."""
    try:
        import sounddevice
    except ModuleNotFoundError as e:
        raise MissingComponent("audio devices need sounddevice: pip install sounddevice") from e
    except (OSError, ImportError) as e:     # sounddevice without the PortAudio library
        raise MissingComponent(
            "audio devices need the PortAudio library, which sounddevice could not load: "
            "install libportaudio2 (Debian/Ubuntu: apt install libportaudio2; "
            "macOS: brew install portaudio)") from e
    return sounddevice
