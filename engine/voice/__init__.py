"""Voice: speech to text (Whisper through faster-whisper) and text to speech (a Piper voice
run with onnxruntime), both on this machine from the first run. The starter models come in
PyPI wheels installed like the starter language model (starter.py). Nothing here imports Qt:
the window plays and records audio itself and hands samples to these functions."""
