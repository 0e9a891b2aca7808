"""``sim``: an offline model that plays the scripted agent its session's task gives it."""
