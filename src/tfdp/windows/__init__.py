"""The window path: decode only the window of an image that a sample's augmentation keeps."""
