
U

bbox
ÍÌÌ=ÍÌL>fff?ÍÌL?

image/encoded


ÿØjpeg

label
ÿÿÿÿÿÿÿÿÿ