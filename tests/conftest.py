"""Test-session settings: Qt renders offscreen (no display on CI), before any QApplication."""
import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
