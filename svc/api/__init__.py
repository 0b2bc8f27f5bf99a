"""The HTTP edge: parse a request, make one engine call, shape the answer for the API version."""
