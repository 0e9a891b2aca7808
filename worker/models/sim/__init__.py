"""``sim``: an offline model that plays an agent and authors real canvas dashboards."""
