"""The dependency profile: histograms of codes and spanning trees."""
