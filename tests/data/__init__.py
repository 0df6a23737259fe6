"""Tests of the corpus readers and the segmenter."""
