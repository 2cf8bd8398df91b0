"""``m5.proxy``: parameter defaults that name another object (only what the declarations use)."""


class _Proxy:
    def __init__(self, base, path=()):
        self._base, self._path = base, path

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Proxy(self._base, (*self._path, name))

    def __repr__(self):
        return ".".join((self._base, *self._path))


Parent = _Proxy("Parent")
Self = _Proxy("Self")

__all__ = ["Parent", "Self"]
