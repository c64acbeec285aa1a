"""The attention hook machinery: the one interception point, the interventions (editors), Capture /
Patch at every site, and attention rows (observers). See interception.py for the order in which
editors and observers run."""
