"""Admin rules on cluster metadata: topics, placement, configs, producer ids."""
