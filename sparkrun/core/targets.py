"""What an operation acts on: a running deployment, else a recipe.

ColdSnap and benchmark commands take a TARGET that is either the name of a
deployment sparkrun runs (which brings its recipe and its port) or a recipe
by name or path; :func:`resolve_target` tells which, and an error names
both what was searched and what runs.
"""

from __future__ import annotations

from dataclasses import dataclass

from sparkrun.core.context import SparkrunContext
from sparkrun.core.deployments import Deployment, DeploymentStore
from sparkrun.core.executors import Executors
from sparkrun.core.names import is_name
from sparkrun.core.recipes import Recipe, find_recipe, load_recipe, recipe_dirs
from sparkrun.errors import RecipeError

__all__ = ["Target", "resolve_target"]


@dataclass(frozen=True)
class Target:
    """A workload name, its recipe, and the deployment running it, if any."""

    workload: str
    recipe: Recipe
    deployment: Deployment | None = None

    @property
    def port(self) -> int | None:
        return self.deployment.port if self.deployment is not None else self.recipe.port


def resolve_target(reference: str, sctx: SparkrunContext) -> Target:
    """A running deployment of that name, else a recipe (by path or name), else an error naming both."""
    store = DeploymentStore(sctx.config.state_dir)
    executors = Executors(sctx.config)
    deployment = store.load(reference) if is_name(reference) else None
    if deployment is not None and executors.state(deployment) != "exited":
        return Target(deployment.name, load_recipe(deployment.recipe_path), deployment)
    config_dir = sctx.config.path.parent if sctx.config.path is not None else None
    try:
        recipe = find_recipe(reference, recipe_dirs(sctx.config.values, config_dir))
    except RecipeError as error:
        running = ", ".join(d.name for d in store.all() if executors.state(d) != "exited") or "none"
        raise RecipeError(f"{error}; nor is it a running deployment (running: {running})") from None
    return Target(recipe.name, recipe)
