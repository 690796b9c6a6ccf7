"""Sphinx directive ``provider-config``: the configuration reference, read from ``provider.yaml``.

``provider.yaml`` at the repository root is the one description of the provider's options (a unit
test keeps ``get_provider_info()`` equal to it). The directive renders every section and option it
declares, with type, default, example and version, at build time: the reference cannot drift from
what Airflow shows in ``airflow config list``. An option without a description, type or
``version_added`` fails the build.

Each option gets the label ``config-<section>-<option>`` for ``:ref:`` links.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from docutils import nodes
from docutils.statemachine import StringList
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective
from sphinx.util.nodes import nested_parse_with_titles

__all__ = ["ProviderConfigDirective", "setup"]

_REQUIRED = ("description", "type", "version_added")


def load_provider_metadata(path: Path) -> dict[str, Any]:
    """Read ``provider.yaml``; an unreadable file or one without a ``config`` mapping fails the build."""
    metadata = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(metadata, dict) or not isinstance(metadata.get("config"), dict):
        raise ValueError(f"{path} has no 'config' mapping of sections")
    return metadata


def _literal(value: Any) -> str:
    text = "" if value is None else str(value)
    return f"``{text}``" if text else '``""`` (empty)'


def render_config(metadata: dict[str, Any], source: str) -> list[str]:
    """The reST lines of the reference: one section per config section, one subsection per option."""
    lines: list[str] = []
    for section, spec in metadata["config"].items():
        title = f"[{section}]"
        lines += [f".. _config-{section}:", "", title, "-" * len(title), ""]
        if spec.get("description"):
            lines += [str(spec["description"]).strip(), ""]
        env_prefix = f"AIRFLOW__{section.upper()}__"
        options = spec.get("options", {})
        lines += ["The section with its defaults:", "", ".. code-block:: ini", "", f"    [{section}]"]
        for option, option_spec in options.items():
            default = option_spec.get("default")
            lines.append(f"    {option} = {'' if default is None else default}".rstrip())
        lines.append("")
        for option, option_spec in options.items():
            missing = [key for key in _REQUIRED if not option_spec.get(key)]
            if missing:
                raise ValueError(f"{source}: option [{section}] {option} has no {', '.join(missing)}")
            heading = f"``{option}``"
            lines += [f".. _config-{section}-{option}:", "", heading, "~" * len(heading), ""]
            lines += [
                f":Type: {option_spec['type']}",
                f":Default: {_literal(option_spec.get('default'))}",
            ]
            if option_spec.get("example") is not None:
                lines.append(f":Example: {_literal(option_spec['example'])}")
            lines += [
                f":Environment variable: ``{env_prefix}{option.upper()}``",
                f":Added in: {option_spec['version_added']}",
                "",
                " ".join(str(option_spec["description"]).split()),
                "",
            ]
    return lines


class ProviderConfigDirective(SphinxDirective):
    """``.. provider-config::`` renders the ``config`` of ``provider.yaml`` (path relative to the docs)."""

    has_content = False
    optional_arguments = 1

    def run(self) -> list[nodes.Node]:
        relative = self.arguments[0] if self.arguments else "../provider.yaml"
        path = (Path(self.env.srcdir) / relative).resolve()
        self.env.note_dependency(str(path))
        try:
            lines = render_config(load_provider_metadata(path), str(path))
        except (OSError, ValueError, yaml.YAMLError) as error:
            raise self.error(f"provider-config: {error}") from error
        container = nodes.section()
        container.document = self.state.document
        nested_parse_with_titles(self.state, StringList(lines, source=str(path)), container)
        return list(container.children)


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("provider-config", ProviderConfigDirective)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
