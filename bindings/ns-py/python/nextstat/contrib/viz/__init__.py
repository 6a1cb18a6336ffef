"""Drop-in for ``pyhf.contrib.viz``: ``brazil``, the CLs curve with its expected band."""
