"""``m5.SimObject``: the configuration tree with gem5's rules (README.md in the folder above).

* a class's parameters and ports are what it and its bases declare (``Param.X``, ``RequestPort``);
* setting anything else raises ``AttributeError`` ("Class X has no parameter y"), unless the value
  is a SimObject, which then becomes a child, as in gem5;
* a SimObject given as a parameter value to an object is adopted as its child when it has no
  parent yet (so ``replayer.gpu_auth`` has the path ``replayer.gpu_auth``);
* :meth:`SimObject.check_params` is gem5's getCCParams check: every parameter, in sorted order,
  needs a value or a default, else ``fatal: <path>.<param> without default or user set value``.
"""

import sys

from .params import NULL, NO_DEFAULT, ParamDesc, PortDesc
from .proxy import _Proxy

__all__ = ["SIMOBJECT_CLASSES", "SimObject", "fatal"]

SIMOBJECT_CLASSES: dict[str, type] = {}


def fatal(fmt, *args):
    """gem5's fatal(): one line on stderr and exit code 1."""
    print("fatal: " + (fmt % args if args else fmt), file=sys.stderr)
    sys.exit(1)


class MetaSimObject(type):
    def __init__(cls, name, bases, body):
        super().__init__(name, bases, body)
        params, ports = {}, {}
        for base in reversed(cls.__mro__[1:]):
            params.update(getattr(base, "_params", {}))
            ports.update(getattr(base, "_ports", {}))
        for key, value in body.items():
            if isinstance(value, ParamDesc):
                params[key] = value
            elif isinstance(value, PortDesc):
                ports[key] = value
        for key in list(params) + list(ports):
            if key in body:
                delattr(cls, key)
        cls._params, cls._ports = params, ports
        cls.abstract = body.get("abstract", False)
        SIMOBJECT_CLASSES[name] = cls


class PortRef:
    def __init__(self, owner, name):
        self.owner, self.name = owner, name

    def describe(self):
        return f"port {type(self.owner).__name__}.{self.name}"


class SimObject(metaclass=MetaSimObject):
    abstract = True

    def __init__(self, **kwargs):
        if type(self).abstract:
            raise RuntimeError(f"Cannot instantiate an abstract SimObject ({type(self).__name__})")
        object.__setattr__(self, "_values", {})  # parameters set by the configuration
        object.__setattr__(self, "_children", {})  # children and adopted parameter objects
        object.__setattr__(self, "_peers", {})  # port connections
        object.__setattr__(self, "_parent", None)
        object.__setattr__(self, "_name", None)
        for key, value in kwargs.items():
            setattr(self, key, value)

    # -- the tree

    def _adopt(self, name, child):
        object.__setattr__(child, "_parent", self)
        object.__setattr__(child, "_name", name)
        self._children[name] = child

    def has_parent(self):
        return self._parent is not None

    def path(self):
        if self._parent is None:
            return f"<orphan {type(self).__name__}>"
        ppath = self._parent.path()
        return self._name if ppath == "root" else f"{ppath}.{self._name}"

    def descendants(self):
        yield self
        for name in sorted(self._children):
            child = self._children[name]
            if child._parent is self:
                yield from child.descendants()

    # -- attributes

    def __setattr__(self, name, value):
        if name.startswith("_"):
            object.__setattr__(self, name, value)
            return
        cls = type(self)
        if name in cls._ports:
            if not isinstance(value, PortRef):
                raise TypeError(f"{cls.__name__}.{name} is a port: connect it to another port, not {value!r}")
            self._peers[name] = value
            return
        param = cls._params.get(name)
        if param is not None:
            try:
                converted = param.convert(value)
            except Exception as e:
                e.args = (f"{e}\nError setting param {cls.__name__}.{name} to {value!r}\n",)
                raise
            self._values[name] = (value, converted)
            if converted is NULL:
                self._children.pop(name, None)
            elif isinstance(converted, SimObject) and not converted.has_parent():
                self._adopt(name, converted)
            return
        if isinstance(value, SimObject):
            self._adopt(name, value)
            return
        raise AttributeError(f"Class {cls.__name__} has no parameter {name}")

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        cls = type(self)
        if name in self._values:
            return self._values[name][1]
        if name in cls._params:
            default = cls._params[name].default
            if default is NO_DEFAULT:
                raise AttributeError(f"{cls.__name__}.{name}: no value and no default yet")
            return default
        if name in cls._ports:
            return PortRef(self, name)
        if name in self._children:
            return self._children[name]
        raise AttributeError(f"object '{cls.__name__}' has no attribute '{name}'")

    # -- gem5's checks at instantiate()

    def check_params(self):
        for name in sorted(type(self)._params):
            if name not in self._values and type(self)._params[name].required:
                fatal("%s.%s without default or user set value", self.path(), name)
            value = self._values.get(name, (None, None))[1]
            if isinstance(value, _Proxy):
                continue
            if isinstance(value, SimObject) and value is not NULL and not value._in_tree():
                fatal("%s.%s refers to %s, which is not in the configuration tree", self.path(), name, value.path())
        object.__setattr__(self, "instantiated", True)

    def _in_tree(self):
        node = self
        while node._parent is not None:
            node = node._parent
        return type(node).__name__ == "Root"

    # -- the record

    def describe(self):
        """{class, params (as the configuration set them), children (objects and port peers)}."""

        def show(v):
            if isinstance(v, (SimObject, PortRef)):
                return v.describe()
            if isinstance(v, (list, tuple)):
                return [show(x) for x in v]
            return v

        params, children = {}, {}
        for name, (given, converted) in self._values.items():
            if converted is NULL or (isinstance(converted, SimObject) and self._children.get(name) is converted):
                continue  # NULL, or an object adopted as a child (listed under children)
            params[name] = f"object {converted.path()}" if isinstance(converted, SimObject) else show(given)
        for name, child in self._children.items():
            children[name] = child.describe() if child._parent is self else f"object {child.path()}"
        for name, peer in self._peers.items():
            children[name] = peer.describe()
        return {"class": type(self).__name__, "params": params, "children": children}
