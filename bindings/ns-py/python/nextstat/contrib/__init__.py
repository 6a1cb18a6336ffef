"""Drop-in for ``pyhf.contrib``: the Brazil-band plots (``contrib.viz.brazil``) and the archive
download (``contrib.utils``). Neither is imported with ``nextstat``, as in pyhf."""
