"""Corpus readers, sentence segmentation and dataset builders."""
