"""A small Dockerfile reader: instructions grouped by build stage (enough for the image tests)."""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Instruction:
    keyword: str
    arguments: str

    def words(self) -> list[str]:
        """The arguments as words: exec form (JSON) or shell words, flags such as --from kept."""
        text = self.arguments.strip()
        if text.startswith("["):
            return [str(word) for word in json.loads(text)]
        return shlex.split(text, comments=False, posix=True)


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[Instruction] = field(default_factory=list)

    def all(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]


def logical_lines(text: str) -> list[str]:
    """Lines with comments dropped and backslash continuations joined."""
    lines: list[str] = []
    current = ""
    for raw in text.splitlines():
        stripped = raw.strip()
        if stripped.startswith("#") or (not stripped and not current):
            continue
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        lines.append(current + stripped)
        current = ""
    if current.strip():
        lines.append(current.strip())
    return lines


def parse(text: str) -> tuple[list[Instruction], list[Stage]]:
    """Global instructions (ARGs before the first FROM) and the stages in order."""
    preamble: list[Instruction] = []
    stages: list[Stage] = []
    for line in logical_lines(text):
        keyword, _, arguments = line.partition(" ")
        instruction = Instruction(keyword.upper(), arguments.strip())
        if instruction.keyword == "FROM":
            match = re.match(r"(\S+)(?:\s+AS\s+(\S+))?", instruction.arguments, re.IGNORECASE)
            assert match, line
            stages.append(Stage(base=match.group(1), name=match.group(2)))
        elif stages:
            stages[-1].instructions.append(instruction)
        else:
            preamble.append(instruction)
    return preamble, stages


def copy_sources(instruction: Instruction) -> tuple[str | None, list[str]]:
    """(--from stage or None for the build context, the source paths) of a COPY or ADD."""
    words = instruction.words()
    stage = None
    paths: list[str] = []
    for word in words:
        if word.startswith("--from="):
            stage = word.removeprefix("--from=")
        elif not word.startswith("--"):
            paths.append(word)
    return stage, paths[:-1]
