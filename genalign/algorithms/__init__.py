"""Algorithms: advantages and losses as pure math, plus thin algorithm classes."""
